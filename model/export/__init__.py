"""A model directory to ONNX: the serving graphs, their cache and attention-map graphs, float16 and int8, the
int8 embedding ranges, and parity against PyTorch."""
