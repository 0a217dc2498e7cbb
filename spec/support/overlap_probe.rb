# frozen_string_literal: true

# OverlapProbe - SQL for handlers in the ordering specs: spec_key_held_elsewhere(k)
# says whether another transaction that is still open is handling key k at this moment. The
# handler takes a transaction-scoped advisory lock on k (class 1); failing that, the holder
# counts only while its transaction is open (it has an xid: the handler wrote a row). A
# committing transaction becomes visible - the next event of its key claimable - a moment
# before it releases its locks, so a held lock alone is not an overlap. pg_stat_clear_snapshot:
# the activity as of now, not as of this transaction's first read of it.
module OverlapProbe
  SQL = <<~SQL
    CREATE OR REPLACE FUNCTION spec_key_held_elsewhere(k text) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN
        IF pg_try_advisory_xact_lock(1, hashtext(k)) THEN
            RETURN false;
        END IF;
        PERFORM pg_stat_clear_snapshot();
        RETURN EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                        WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
                          AND l.classid = 1::oid AND l.objsubid = 2
                          AND l.objid::bigint = (hashtext(k)::bigint & 4294967295)
                          AND a.backend_xid IS NOT NULL);
    END
    $$;
  SQL
end
