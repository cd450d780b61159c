"""Speed paths, each tested equal to the plain path in tied_embed.core it replaces."""
