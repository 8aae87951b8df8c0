"""ONNX Runtime: sessions and the calls that run the graphs. The only package of the serving side that
imports onnxruntime and knows which device the graphs run on; it keeps no request state between calls."""
