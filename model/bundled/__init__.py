"""The bundled models' tasks, training and evaluation (numbers, numbers-multilingual, the number rankers)."""
