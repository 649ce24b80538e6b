"""The HTTP executor: the three calls of the protocol (trigger, poll, cancel), how their
answers are read, the one place that records a change (``recorder``), and the mechanism the
engine runs on (``runner``: a timetable of due actions and the hand-out to its workers)."""
