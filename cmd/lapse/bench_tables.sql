-- The rows (the statistics' live tuples: no scan of a large table) and
-- bytes (heap, indexes, TOAST) of each lapse table of the schema the
-- store's URL names, largest first.
SELECT relname, n_live_tup, pg_total_relation_size(relid)
FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname LIKE 'lapse\_%'
ORDER BY 3 DESC;
