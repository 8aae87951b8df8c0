"""The build side (torch, never served): the Transformer, each family's importer and random checkpoints, the export
to ONNX, and the training of the bundled models."""
