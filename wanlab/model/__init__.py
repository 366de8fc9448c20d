"""The experiment model: the immutable IR every front end produces."""
