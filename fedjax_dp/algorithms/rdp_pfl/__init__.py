"""RDP-PFL (Wei et al., IEEE TIFS 2023, paper 003): federated MAML whose inner and outer
steps are both DP-SGD steps, with personalisation of unseen target clients."""
