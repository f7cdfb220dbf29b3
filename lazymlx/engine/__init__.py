"""The LazyLLM engine, its imports one way: the schedule (config) -> the lazy context (cache) ->
one block over chosen tokens (blocks) -> the lazy prompt step (prefill), the decode policies
(decode) and idle completion (complete) -> the model as mlx-lm's decode loop calls it (model).
Beside them: presets, the chat template's closing tokens (templates), Ctrl-C held mid-step
(interrupts) and whole-file writes (atomic). Of the app layer it imports only the models'
adapters, the errors, a tensor-parallel group's collectives (lazymlx/collectives.py) and, in
model.py, the context-parallel chain a first prompt may run on (lazymlx/context_parallel.py)."""
