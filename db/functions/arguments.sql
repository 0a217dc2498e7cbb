-- functions/arguments.sql - the argument checks the gem's functions share (SQLSTATE 22023).
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Fails the caller when p_value is NULL or not one of p_choices:
--   '<p_caller>: <p_name> must be a, b or c, not <p_value>' (SQLSTATE 22023; NULL prints <NULL>).
-- Returns nothing otherwise. One PL/pgSQL call: for a function's checks at its start, never
-- per row of a statement.
CREATE OR REPLACE FUNCTION webhook_inbox_check_choice(p_caller text, p_name text, p_value text,
                                                      VARIADIC p_choices text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL OR NOT p_value = ANY (p_choices) THEN
        RAISE EXCEPTION '%: % must be % or %, not %', p_caller, p_name,
              array_to_string(p_choices[1:cardinality(p_choices) - 1], ', '), p_choices[cardinality(p_choices)], p_value
              USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_check_choice(text, text, text, text[]) IS
    'Argument check: raises 22023 "<caller>: <name> must be a, b or c, not <value>" when the value is NULL or not one of the choices.';
