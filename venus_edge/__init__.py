"""venus-edge: run the DR-Venus deep-research agent in-process on llama.cpp."""
