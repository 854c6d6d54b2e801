"""Beam's `typehints` package: type-hint names, the `with_input_types` / `with_output_types`
decorators, and the construction-time type check.

The names are `typing`'s forms (`Tuple`, `List`, `Dict`, `Set`, `FrozenSet`, `Iterable`,
`Iterator`, `Any`, `Union`, `Optional`) plus Beam's `KV[K, V]` (= `Tuple[K, V]`),
`Generator[T]` (= `Iterator[T]`) and `TypeVariable`; plain `typing` hints work the same.
A PCollection's element type comes from the hints of the step that makes it (its
`.with_output_types()`, its function's decorator or annotations, or what Create is given) and
chooses its coder (`headrace.coders.registry.get_coder`). When a step declares an input type
that the element type of its input cannot satisfy (`is_consistent_with`), applying it raises
`TypeCheckError` naming both steps, unless the pipeline option `--no_pipeline_type_check`
is given.
"""

from headrace.errors import TypeCheckError
from headrace.typehints.decorators import (
    IOTypeHints, get_type_hints, with_input_types, with_output_types,
)
from headrace.typehints.typehints import (
    KV, Any, Dict, FrozenSet, Generator, Iterable, Iterator, List, Optional, Set, Tuple,
    TypeVariable, Union, is_consistent_with,
)

__all__ = [
    "KV", "Any", "Dict", "FrozenSet", "Generator", "IOTypeHints", "Iterable", "Iterator", "List",
    "Optional", "Set", "Tuple", "TypeCheckError", "TypeVariable", "Union", "get_type_hints",
    "is_consistent_with", "with_input_types", "with_output_types",
]
