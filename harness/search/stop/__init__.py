"""What ends trials or the search early: ASHA / MO-ASHA (Ray Tune's ``TrialScheduler`` seam), the
``search.stop`` rules and the hopeless-search rule (``Stopper`` seam), and failure reasons."""
