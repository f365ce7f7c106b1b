-- A delivery's row is written twice: recorded by the webhook consumer, then updated with its outcome
-- (src/webhooks/journal.ts, `writeBackMany`). The update changes indexed columns, so it is never a HOT
-- update, but where its page has room the new version stays on the same page: PostgreSQL logs it
-- against the old one (only the bytes that changed, one page touched) instead of the whole row on
-- another page. With every page filled at the insert, an outcome moved its row to the end of the
-- table; a drain wrote about 150 bytes less WAL per delivery with half of each page left for the
-- update (docs/performance.md, "What limits delivery"). Pages written before this keep their rows.
alter table hub.deliveries set (fillfactor = 50);
