"""The stores: the FAISS index, group commits on each engine."""
