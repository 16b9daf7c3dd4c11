"""One construct per logical unit of the deployment; the stacks only compose them."""
