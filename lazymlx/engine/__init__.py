"""The LazyLLM engine, its imports one way: the schedule (config) -> the lazy context (cache) ->
one block over chosen tokens (blocks) -> the lazy prompt step (prefill), the decode policies
(decode) and idle completion (complete) -> the model as mlx-lm's decode loop calls it (model).
Beside them: presets, the chat template's closing tokens (templates), Ctrl-C held mid-step
(interrupts) and whole-file writes (atomic). Of the rest of lazymlx it imports only the errors,
the platform module and the models' adapters and registry; a parallel group (lazymlx/parallel/)
hands it what it changes through hooks."""
