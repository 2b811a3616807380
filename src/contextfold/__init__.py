"""contextfold: an honest token budget and a fitted view for LLM agents."""
