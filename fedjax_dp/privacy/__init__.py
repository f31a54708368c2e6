"""Privacy toolbox: clipping, noise and accounting."""
