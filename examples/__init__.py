"""The examples. examples.models: reference models (MLPerf Tiny, the digits CNN) the tests and benchmarks train."""
