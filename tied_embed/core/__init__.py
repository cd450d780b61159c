"""The story: the tied and untied modules, the plain loss, the two path gradients and the train step."""
