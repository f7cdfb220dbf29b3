"""Where models come from and how they are prepared for mlx-lm (installed as `lazymlx.models`)."""
