"""What runs requests on a model: the embedding batcher, and for generation the scheduler, its cache,
token choice (greedy, sampling, beam search) and the text of each sequence."""
