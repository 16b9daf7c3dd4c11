"""The two stacks: stateful resources apart from everything that can be replaced at will."""
