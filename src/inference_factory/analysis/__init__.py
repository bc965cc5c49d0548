"""Questions asked of the engine and the factory, one folder per question over shared rooms:
:mod:`.closed_loop` (the closed loop ``bench`` and ``plan`` share), :mod:`.economics` (cost
and price per token), :mod:`.pareto`; :mod:`.plan`, :mod:`.bench`, :mod:`.sweep`,
:mod:`.questions` (the question commands and sensitivity), :mod:`.validation` (against
published figures, with bands). No click here."""
