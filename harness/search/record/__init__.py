"""What reaches the store and the screen from the driver (Ray Tune's ``Callback`` seam): the store writer,
the progress line, the experiment trackers, and how a finished trial, a finished search and a resumed
one are recorded and reconciled."""
