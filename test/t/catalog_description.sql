-- What extension ordered_events consists of, one line per fact, with no
-- OIDs: two databases whose extensions were made by different scripts
-- (a fresh install, an update chain) have the same lines iff they hold the
-- same objects, definitions, privileges and comments.
WITH ext AS (
    SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'ordered_events'
), member AS (
    SELECT d.classid, d.objid,
           (pg_catalog.pg_identify_object(d.classid, d.objid, 0)).type AS type,
           (pg_catalog.pg_identify_object(d.classid, d.objid, 0)).identity AS identity
      FROM pg_catalog.pg_depend d, ext
     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid = ext.oid AND d.deptype = 'e'
), fact(identity, what, value) AS (
    SELECT identity, 'member', type FROM member
    UNION ALL
    SELECT m.identity, 'comment', pg_catalog.obj_description(m.objid, c.relname)
      FROM member m JOIN pg_catalog.pg_class c ON c.oid = m.classid
     WHERE pg_catalog.obj_description(m.objid, c.relname) IS NOT NULL
    UNION ALL
    SELECT m.identity, 'initprivs', i.initprivs::text
      FROM member m JOIN pg_catalog.pg_init_privs i ON i.classoid = m.classid AND i.objoid = m.objid
     WHERE i.objsubid = 0
    UNION ALL
    SELECT m.identity, 'initprivs of column ' || a.attname, i.initprivs::text
      FROM member m JOIN pg_catalog.pg_init_privs i ON i.classoid = m.classid AND i.objoid = m.objid
      JOIN pg_catalog.pg_attribute a ON a.attrelid = m.objid AND a.attnum = i.objsubid
     WHERE i.objsubid <> 0
    -- functions
    UNION ALL
    SELECT m.identity, 'definition',
           pg_catalog.regexp_replace(pg_catalog.pg_get_functiondef(p.oid), '\$libdir/\S+''', '$libdir''')
      FROM member m JOIN pg_catalog.pg_proc p ON p.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.prokind <> 'a'
    UNION ALL
    SELECT m.identity, 'owner and acl', pg_catalog.pg_get_userbyid(p.proowner) || ' ' || coalesce(p.proacl::text, 'default')
      FROM member m JOIN pg_catalog.pg_proc p ON p.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    -- relations
    UNION ALL
    SELECT m.identity, 'relation',
           pg_catalog.concat_ws(' ', c.relkind::text, c.relpersistence::text, pg_catalog.pg_get_userbyid(c.relowner),
                                coalesce(c.relacl::text, 'default'), c.reloptions::text,
                                CASE WHEN c.relrowsecurity THEN 'rls' END,
                                CASE WHEN c.relforcerowsecurity THEN 'forced rls' END,
                                c.relreplident::text)
      FROM member m JOIN pg_catalog.pg_class c ON c.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'view', pg_catalog.pg_get_viewdef(c.oid)
      FROM member m JOIN pg_catalog.pg_class c ON c.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.relkind IN ('v', 'm')
    UNION ALL
    -- columns in their order (dropped ones left out), with everything a column has
    SELECT m.identity,
           pg_catalog.format('column %s', pg_catalog.to_char(pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum), 'FM000')),
           pg_catalog.concat_ws(' ', a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
                                CASE WHEN a.attcollation <> t.typcollation THEN 'collate ' || co.collname END,
                                CASE WHEN a.attnotnull THEN 'not null' END,
                                'default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid),
                                CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                                CASE WHEN a.attgenerated <> '' THEN 'generated' END,
                                'acl ' || a.attacl::text, 'storage ' || a.attstorage::text,
                                'comment ' || pg_catalog.col_description(a.attrelid, a.attnum))
      FROM member m
      JOIN pg_catalog.pg_attribute a ON a.attrelid = m.objid AND a.attnum > 0 AND NOT a.attisdropped
      JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
      LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'constraint ' || co.conname, pg_catalog.pg_get_constraintdef(co.oid)
      FROM member m JOIN pg_catalog.pg_constraint co ON co.conrelid = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'index ' || ic.relname,
           pg_catalog.pg_get_indexdef(i.indexrelid) || coalesce(' comment ' || pg_catalog.obj_description(i.indexrelid, 'pg_class'), '')
      FROM member m JOIN pg_catalog.pg_index i ON i.indrelid = m.objid
      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'trigger ' || tg.tgname, pg_catalog.pg_get_triggerdef(tg.oid) || ' ' || tg.tgenabled::text
      FROM member m JOIN pg_catalog.pg_trigger tg ON tg.tgrelid = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND NOT tg.tgisinternal
    UNION ALL
    SELECT m.identity, 'policy ' || po.polname,
           pg_catalog.concat_ws(' ', po.polcmd::text, po.polpermissive, po.polroles::regrole[]::text,
                                pg_catalog.pg_get_expr(po.polqual, po.polrelid),
                                pg_catalog.pg_get_expr(po.polwithcheck, po.polrelid))
      FROM member m JOIN pg_catalog.pg_policy po ON po.polrelid = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'rule ' || r.rulename, pg_catalog.pg_get_ruledef(r.oid)
      FROM member m JOIN pg_catalog.pg_rewrite r ON r.ev_class = m.objid
     WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND r.rulename <> '_RETURN'
    UNION ALL
    SELECT m.identity, 'sequence',
           pg_catalog.concat_ws(' ', pg_catalog.format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
                                s.seqmax, s.seqmin, s.seqcache, s.seqcycle,
                                'owned by ' || (SELECT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid)
                                                  FROM pg_catalog.pg_depend d
                                                 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                                                   AND d.objid = s.seqrelid AND d.deptype IN ('a', 'i')
                                                   AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass))
      FROM member m JOIN pg_catalog.pg_sequence s ON s.seqrelid = m.objid
    -- types
    UNION ALL
    SELECT m.identity, 'type',
           pg_catalog.concat_ws(' ', t.typtype::text, pg_catalog.pg_get_userbyid(t.typowner),
                                coalesce(t.typacl::text, 'default'),
                                CASE t.typtype
                                    WHEN 'e' THEN (SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                                                     FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid)
                                    WHEN 'd' THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) || ' '
                                                  || coalesce((SELECT pg_catalog.string_agg(pg_catalog.pg_get_constraintdef(co.oid), ' ' ORDER BY co.conname)
                                                                 FROM pg_catalog.pg_constraint co WHERE co.contypid = t.oid), '')
                                END)
      FROM member m JOIN pg_catalog.pg_type t ON t.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass
    UNION ALL
    -- a composite type's attributes
    SELECT m.identity, pg_catalog.format('attribute %s', pg_catalog.to_char(a.attnum, 'FM000')),
           a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
      FROM member m JOIN pg_catalog.pg_type t ON t.oid = m.objid
      JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass
    UNION ALL
    SELECT m.identity, 'schema', pg_catalog.pg_get_userbyid(n.nspowner) || ' ' || coalesce(n.nspacl::text, 'default')
      FROM member m JOIN pg_catalog.pg_namespace n ON n.oid = m.objid
     WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
    UNION ALL
    SELECT 'extension', 'configuration',
           coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', c::regclass, w), ', ' ORDER BY c::regclass::text)
                       FROM unnest(e.extconfig, e.extcondition) u(c, w)), 'none')
      FROM pg_catalog.pg_extension e, ext WHERE e.oid = ext.oid
)
SELECT identity, what, value FROM fact ORDER BY identity, what, value;
