"""What runs on a Ray worker (pickled there, imports little): the trainable and data-parallel ranks."""
