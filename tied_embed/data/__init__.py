"""Data: the bigram dataset a run trains and evaluates on, and its sources."""
