-- The signature checks of the functions of the contract, shared by
-- 02_functions.sql, 06_consumers.sql and 07_handlers.sql.  \ir this file,
-- fill contract_function, then SELECT * FROM pg_temp.function_contract_tests():
-- 7 tests a function, each kind for every function in order of ord.  Each
-- exists, has no overloads, returns its type, has exactly its argument
-- names, types and defaults and its result, has its volatility, and is not
-- STRICT (a NULL argument must give an error or a meaning, never a silent
-- NULL).
CREATE TEMP TABLE contract_function (
    ord int PRIMARY KEY,
    name name NOT NULL,
    argtypes name[] NOT NULL,
    returns text NOT NULL,          -- as function_returns() expects it
    volatility text NOT NULL,
    arguments text NOT NULL,        -- pg_get_function_arguments()
    result text NOT NULL            -- pg_get_function_result()
) ON COMMIT DROP;

CREATE FUNCTION pg_temp.function_contract_tests() RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT has_function('ordered_events', f.name, f.argtypes,
               format('function %s(%s) exists', f.name, array_to_string(f.argtypes, ', ')))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT is((SELECT count(*)::int FROM pg_proc p
                WHERE p.pronamespace = 'ordered_events'::regnamespace AND p.proname = f.name),
              1, format('%s has no overloads', f.name))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT function_returns('ordered_events', f.name, f.argtypes, f.returns,
               format('%s returns %s', f.name, f.returns))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT is((SELECT pg_get_function_arguments(p.oid) FROM pg_proc p
                WHERE p.pronamespace = 'ordered_events'::regnamespace AND p.proname = f.name),
              f.arguments, format('%s: argument names, types and defaults', f.name))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT is((SELECT pg_get_function_result(p.oid) FROM pg_proc p
                WHERE p.pronamespace = 'ordered_events'::regnamespace AND p.proname = f.name),
              f.result, format('%s: result %s', f.name, f.result))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT volatility_is('ordered_events', f.name, f.argtypes, f.volatility,
               format('%s is %s', f.name, f.volatility))
      FROM contract_function f ORDER BY f.ord;
    RETURN QUERY
    SELECT isnt_strict('ordered_events', f.name, f.argtypes,
               format('%s is not strict (a NULL argument is an error)', f.name))
      FROM contract_function f ORDER BY f.ord;
END;
$$;
