"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / (len(values) + 1)


def spread(values):
    """The difference between the largest and the smallest value."""
    return max(values) - min(values)
