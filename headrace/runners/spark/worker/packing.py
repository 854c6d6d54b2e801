"""Records as they cross Spark: the C pickler (cloudpickle for what it cannot pickle), and one
output's elements of a bundle packed into one record."""

from __future__ import annotations

import pickle
from typing import Any, List, Tuple

import cloudpickle
from pyspark.serializers import FramedSerializer


class FastPickleSerializer(FramedSerializer):
    """Serialises RDD records with the C pickler, falling back to cloudpickle for what it cannot
    pickle (PySpark's default pickles every record with cloudpickle, which is several times slower)."""

    def dumps(self, obj: Any) -> bytes:
        """`obj` pickled."""
        try:
            return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        except Exception:
            return cloudpickle.dumps(obj, pickle.HIGHEST_PROTOCOL)

    def loads(self, obj: bytes, encoding: str = "bytes") -> Any:
        """The object pickled in `obj`."""
        return pickle.loads(obj, encoding=encoding)


_PACKER = FastPickleSerializer()


def pack(values: Any) -> bytes:
    """Values pickled together (one output's elements of one bundle), for `unpack`."""
    return _PACKER.dumps(values)


def unpack(record: Tuple[int, bytes]) -> List[Any]:
    """The values of a record (index, pack(values))."""
    return pickle.loads(record[1])
