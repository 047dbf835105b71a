"""The embedding model: its actor, and the torch-free ONNX graph."""
