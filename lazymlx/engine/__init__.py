"""The LazyLLM engine: the schedule and its presets (config, presets), the lazy context (cache),
one block over chosen tokens (blocks), the lazy prompt step (prefill), the model as mlx-lm's
decode loop calls it (decode), idle completion (complete) and the chat template's closing
tokens (templates). It imports nothing of the app layer: only the models' adapters, the
errors, and a tensor-parallel group's collectives (lazymlx/collectives.py)."""
