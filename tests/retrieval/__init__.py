"""Retrieval: query processing, fusion, term matching, the reranker, the real model."""
