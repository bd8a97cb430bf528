"""What proposes configurations: the Optuna searcher behind Ray Tune's ``Searcher`` seam, its samplers,
the initial design (a spread over the cost objective) and the warm start from earlier studies."""
