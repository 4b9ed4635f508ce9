-- SPEC G15: a standing revision's hand-off moves its `opening` and `open` sessions to
-- `closing`, for its `standing-withdrawal` cleanup. $1 revision id.
UPDATE occ.repository_sessions
SET phase = 'closing', updated_at = clock_timestamp()
WHERE revision_id = $1 AND phase IN ('opening', 'open')
