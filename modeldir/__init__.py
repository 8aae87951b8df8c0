"""The model-directory contract that the build side (model/) writes and the serving side (service/) reads:
file names, graph input and output names, the manifest and its checksums, tokenizers, and the reference
greedy decoder used to check exported graphs. It imports neither side, and never torch."""
