"""The Lightning plumbing the parts share: which Lightning package a Trainer is of and the class twins
(``namespace``), what Lightning sets on a Trainer (``attributes``), instance patches of hook methods (``hooks``),
the Trainer flags a preset sets and the one policy for them (``trainer_flags``), and trial steps that leave the run
as they found it (``trial_steps``, ``batch_trials``). It imports nothing of the pack's callbacks: the rooms above
lean on it, never the reverse."""
