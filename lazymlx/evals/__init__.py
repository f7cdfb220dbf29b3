"""The offline accuracy suite: long-context retrieval tasks generated from a seed, and their runner."""
