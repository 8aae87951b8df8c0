"""The attention-maps capability: every layer's and head's weights for one input."""
