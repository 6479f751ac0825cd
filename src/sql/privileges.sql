/*
 * Owners and privileges (docs/security.md).  A public function that must
 * know its caller is a C entry point (src/privileges.c) running
 * "<name>_as(..., caller)" as the extension's owner; these check the
 * caller's rights.
 */

-- The error unless the caller may act as the owner of the object.
CREATE FUNCTION ordered_events.check_owner(kind text, name text, owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NULL: a consumer of 0.2 without a handler, which has no owner
    IF owner IS NOT NULL AND NOT pg_catalog.pg_has_role(caller, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of % "%"', kind, name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('It belongs to role %s; role %s does not have its privileges.',
                                             owner, caller),
                  HINT = 'Run this as the owner, or as a member of the owner role.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_owner(text, text, regrole, regrole) IS
    'Internal: the error unless a role may act as the owner of a stream or consumer';
REVOKE EXECUTE ON FUNCTION ordered_events.check_owner(text,text,regrole,regrole) FROM PUBLIC;
-- The error unless "caller" may give an object to the role new_owner.
CREATE FUNCTION ordered_events.check_new_owner(kind text, name text, new_owner regrole,
                                               caller regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF new_owner = 0 OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = new_owner) THEN
        PERFORM ordered_events.invalid_option('owner', new_owner::text, 'Name an existing role.');
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, new_owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be able to act as role % to give it % "%"', new_owner, kind, name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'As for ALTER ... OWNER TO: be a member of the new owner role, or a superuser.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_new_owner(text, text, regrole, regrole) IS
    'Internal: the error unless a role may give an object to another role';
REVOKE EXECUTE ON FUNCTION ordered_events.check_new_owner(text,text,regrole,regrole) FROM PUBLIC;
-- The error unless a role has a privilege on a stream.
CREATE FUNCTION ordered_events.check_stream_privilege(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT ordered_events.has_stream_privilege(role, stream, privilege) THEN
        RAISE EXCEPTION 'permission denied for stream "%"', stream
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Its privilege ''%s'' is not granted to role %s.',
                                             privilege, role),
                  HINT = pg_catalog.format('Its owner, role %s, grants it with ordered_events.grant_stream(%L, %L, role).',
                                           (SELECT d.owner FROM ordered_events.stream_def d
                                             WHERE d.stream = check_stream_privilege.stream),
                                           stream, privilege);
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_stream_privilege(text, text, regrole) IS
    'Internal: the error unless a role has a privilege on a stream';
REVOKE EXECUTE ON FUNCTION ordered_events.check_stream_privilege(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.has_stream_privilege(role regrole, stream text, privilege text)
RETURNS boolean
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_has_stream_privilege';
COMMENT ON FUNCTION ordered_events.has_stream_privilege(regrole, text, text) IS
    'Whether a role has the privilege read or write on a stream';
CREATE FUNCTION ordered_events.has_stream_privilege(stream text, privilege text)
RETURNS boolean
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_has_stream_privilege';
COMMENT ON FUNCTION ordered_events.has_stream_privilege(text, text) IS
    'Whether the current role has the privilege read or write on a stream';
-- The views of events call it as their reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.may_read_stream(stream text)
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_may_read_stream';
COMMENT ON FUNCTION ordered_events.may_read_stream(text) IS
    'Internal: whether the current role may read the events of a stream';
-- An acl with a privilege (INSERT or SELECT) of a grantee added or removed:
-- one item per grantee and privilege; NULL when none is left, as for a new
-- stream ('{}' has no dimension: aclexplode() and aclmask() reject it).
CREATE FUNCTION ordered_events.acl_with(acl aclitem[], owner regrole, grantee regrole,
                                        privilege text, present boolean)
RETURNS aclitem[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.array_agg(pg_catalog.makeaclitem(x.grantee, owner, x.privilege_type, false)
                            ORDER BY x.grantee, x.privilege_type)
  FROM (SELECT a.grantee, a.privilege_type FROM pg_catalog.aclexplode(acl) a
         WHERE NOT (a.grantee = acl_with.grantee AND a.privilege_type = privilege)
        UNION
        SELECT acl_with.grantee, privilege WHERE present) x
$$;
COMMENT ON FUNCTION ordered_events.acl_with(aclitem[], regrole, regrole, text, boolean) IS
    'Internal: the acl of a stream with a privilege granted or revoked';
REVOKE EXECUTE ON FUNCTION ordered_events.acl_with(aclitem[],regrole,regrole,text,boolean) FROM PUBLIC;
CREATE FUNCTION ordered_events.grant_stream_as(stream text, privilege text, role regrole,
                                               caller regrole, present boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('privilege', privilege IS NULL);
    PERFORM ordered_events.check_not_null('role', role IS NULL);
    IF privilege NOT IN ('read', 'write') THEN
        PERFORM ordered_events.invalid_option('privilege', privilege,
            'Use ''write'' (ingest, inbox, append) or ''read'' (subscribe a consumer; see its events in released, pending, unprocessed).');
    END IF;
    d := ordered_events.stream_or_error(stream, true);
    PERFORM ordered_events.check_owner('stream', stream, d.owner, caller);
    UPDATE ordered_events.stream_def s
       SET acl = ordered_events.acl_with(d.acl, d.owner, role,
                                         CASE privilege WHEN 'write' THEN 'INSERT' ELSE 'SELECT' END,
                                         present)
     WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.grant_stream_as(text, text, regrole, regrole, boolean) IS
    'Internal: grant_stream() and revoke_stream() once they know the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.grant_stream_as(text,text,regrole,regrole,boolean) FROM PUBLIC;
CREATE FUNCTION ordered_events.grant_stream(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.grant_stream(text, text, regrole) IS
    'Grant read or write on a stream to a role (0: PUBLIC); for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.grant_stream(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.revoke_stream_as(stream text, privilege text, role regrole,
                                                caller regrole)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT ordered_events.grant_stream_as(stream, privilege, role, caller, false)
$$;
COMMENT ON FUNCTION ordered_events.revoke_stream_as(text, text, regrole, regrole) IS
    'Internal: revoke_stream() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.revoke_stream_as(text,text,regrole,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.revoke_stream(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.revoke_stream(text, text, regrole) IS
    'Revoke read or write on a stream from a role (0: PUBLIC); for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.revoke_stream(text,text,regrole) FROM PUBLIC;
