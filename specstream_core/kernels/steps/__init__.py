"""Decoder-layer steps as kernel calls: fused fronts and backs, whole layers and runs of layers."""
