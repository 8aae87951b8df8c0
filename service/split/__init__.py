"""The server split across processes (--api-processes N): one engine process that runs the models, and N
API processes that run the front doors, tokenizing and detokenizing, sharing the ports."""
