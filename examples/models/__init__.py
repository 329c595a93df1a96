"""Reference models as PyTorch modules and their ONNX exports: mlperf_tiny (the four MLPerf Tiny models),
digits_cnn (a small CNN on scikit-learn's digits)."""
