"""XLM-RoBERTa's random checkpoints (multilingual-e5's and bge-m3's layouts) and bge-m3's two heads."""
