-- The retry sweep closes test deliveries whose process stopped before recording their outcome
-- (never attempted, lease run out: docs/integrations.md "Test"). Tests are left out of
-- deliveries_open; this index holds only the tests not attempted yet, a handful at any time.
create index deliveries_tests_unattempted on hub.deliveries (lease_until) where kind = 'test' and attempts = 0 and closed_reason is null;
