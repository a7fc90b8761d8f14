"""Running decode methods on demo models: what ``hetspec run`` and ``hetspec profile-acceptance`` do.

:mod:`~real.run.request` checks the knobs without torch; :mod:`~real.run.session` loads the demo models,
builds a method's config and decodes prompts; :mod:`~real.run.checkpoint_models` loads models given by path;
:mod:`~real.run.demo_run` is the ``run`` and ``profile-acceptance`` commands (single worker here, several
through :mod:`real.hetero.runner`);
:mod:`~real.run.worker` names the workers (``cpu``, ``cpuN``, ``cuda:K``) and configures a thread as one;
:mod:`~real.run.compare` times methods side by side; :mod:`~real.run.repeats` is the one
interleaved-repeat measurement protocol every timed experiment uses (guarded, a process a repeat:
:mod:`~real.run.repeat_processes`); :mod:`~real.run.acceptance`
measures an acceptance profile on calibration prompts."""
