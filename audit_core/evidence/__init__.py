"""Evidence a data owner can take further: per-document decisions at a stated
false-positive rate (``calibration``), honest non-answers (``answers``), a
collection-level test against controls (``collection``) and canaries
(``canaries``). Nothing in this package queries a target."""
