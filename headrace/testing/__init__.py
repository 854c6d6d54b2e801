"""Testing helpers: assert_that / equal_to, TestPipeline."""
