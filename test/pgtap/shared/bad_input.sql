-- The checks of bad input, shared by 04_errors.sql, 06_consumers.sql and
-- 07_handlers.sql.  \ir this file, fill bad_input, then
-- SELECT * FROM pg_temp.bad_input_tests(): 2 tests a row, each kind for
-- every row in order of id.  Each statement raises its SQLSTATE, and its
-- message is lower-case and has a hint.  Each runs in a subtransaction
-- that is rolled back: whether it changed nothing is for the caller to
-- check.
CREATE TEMP TABLE bad_input (
    id int PRIMARY KEY,
    sqlstate text NOT NULL,
    label text NOT NULL,
    sql text NOT NULL
) ON COMMIT DROP;

-- The error a statement raises: SQLSTATE, message and hint.
CREATE FUNCTION pg_temp.error_of(sql text,
    OUT state text, OUT message text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            hint = PG_EXCEPTION_HINT;
END;
$$;

CREATE FUNCTION pg_temp.bad_input_tests() RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT throws_ok(b.sql, b.sqlstate, NULL, format('%s: %s', b.sqlstate, b.label))
      FROM bad_input b ORDER BY b.id;
    RETURN QUERY
    SELECT ok(e.message ~ '^[a-z]' AND coalesce(e.hint, '') <> '',
              format('%s: lower-case message and a hint', b.label))
      FROM bad_input b, LATERAL pg_temp.error_of(b.sql) e ORDER BY b.id;
END;
$$;
