
# The setup the TAP tests share: a PostgreSQL::Test::Cluster with the
# library preloaded, the worker's GUCs, and the extension created.  Only
# setup lives here; every check stays in its test.
#
#   use FindBin;
#   use lib $FindBin::RealBin;
#   use OrderedEvents;
#
#   my $node = OrderedEvents::node('name',
#       databases => 'postgres',    # ordered_events.databases: where workers run
#       naptime   => 200,           # ordered_events.naptime, in ms
#       conf      => [ 'restart_after_crash = on' ],    # more postgresql.conf lines
#       allows_streaming => 1,      # passed to init() (a primary for a standby)
#       start     => 0,             # only init and configure (default: start)
#       extension => 0);            # no CREATE EXTENSION in postgres (default: create it)
#
# shared_preload_libraries = 'ordered_events' is always set.  Without
# databases, no worker serves any database (the GUC's default is empty).

package OrderedEvents;

use strict;
use warnings;

use Carp;
use PostgreSQL::Test::Cluster;

my %node_options =
  map { $_ => 1 } qw(databases naptime conf allows_streaming start extension);

# A new node named $name: initialized, the library preloaded, the options
# above written to postgresql.conf; unless start => 0, started, and unless
# extension => 0, with the extension created in database postgres.
sub node
{
	my ($name, %opts) = @_;

	for my $opt (sort keys %opts)
	{
		croak "OrderedEvents::node: unknown option \"$opt\""
		  unless $node_options{$opt};
	}
	my $start = $opts{start} // 1;
	my $extension = $opts{extension} // 1;
	croak 'OrderedEvents::node: extension => 1 needs start => 1'
	  if $extension && !$start && exists $opts{extension};

	my $conf = "shared_preload_libraries = 'ordered_events'\n";
	$conf .= "ordered_events.databases = '$opts{databases}'\n"
	  if defined $opts{databases};
	$conf .= "ordered_events.naptime = $opts{naptime}\n"
	  if defined $opts{naptime};
	$conf .= "$_\n" for @{ $opts{conf} // [] };

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opts{allows_streaming} // 0);
	$node->append_conf('postgresql.conf', $conf);
	return $node unless $start;

	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ordered_events')
	  if $extension;
	return $node;
}

# The cycles the release worker of database postgres has finished.
sub release_cycles
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
}

# Wait until that worker has finished two more cycles: whatever one in
# progress was doing, a whole cycle ran after the caller's last commit.
# True once it has (poll_query_until's result).
sub two_more_cycles
{
	my ($node) = @_;
	my $from = release_cycles($node);
	return $node->poll_query_until('postgres', qq{
		SELECT cycles >= $from + 2
		  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'});
}

# Send $sql to a background_psql session without waiting for its result
# (the session's next query() or query_safe() reads what it printed).
sub send_query
{
	my ($session, $sql) = @_;
	$session->{stdin} .= "$sql\n";
	$session->{run}->pump_nb();
	return;
}

# How many seqs of global stream $stream below its range_end are not
# exactly one of released or skipped (docs/architecture.md, rule 4: '0'
# when the range holds).
sub seqs_not_released_or_skipped_once
{
	my ($node, $stream) = @_;
	return $node->safe_psql('postgres', qq{
	SELECT count(*)
	  FROM generate_series(1, (SELECT range_end - 1 FROM ordered_events.ranges
	                            WHERE stream = '$stream')) AS g(seq)
	 WHERE (SELECT count(*) FROM ordered_events.released r
	         WHERE r.stream = '$stream' AND r.seq = g.seq)
	     + (SELECT count(*) FROM ordered_events.skipped_gaps k
	         WHERE k.stream = '$stream' AND g.seq BETWEEN k.gap_start AND k.gap_end) <> 1});
}

# The members of the extension ordered_events in a database, and its
# schema, as (classid, objid, owner, kind): kind is acldefault()'s letter.
my $members_sql = q{
	WITH m AS (
		SELECT d.classid, d.objid
		  FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
		 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND d.deptype = 'e' AND x.extname = 'ordered_events'
		UNION
		SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, 'ordered_events'::pg_catalog.regnamespace)
	SELECT m.classid, m.objid, o.owner, o.kind, o.acl
	  FROM m CROSS JOIN LATERAL (
		SELECT c.relowner, CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END, c.relacl
		  FROM pg_catalog.pg_class c WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = m.objid
		UNION ALL
		SELECT p.proowner, 'f', p.proacl
		  FROM pg_catalog.pg_proc p WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = m.objid
		UNION ALL
		SELECT n.nspowner, 'n', n.nspacl
		  FROM pg_catalog.pg_namespace n WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND n.oid = m.objid
		UNION ALL
		SELECT t.typowner, 'T', t.typacl
		  FROM pg_catalog.pg_type t WHERE m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = m.objid
	) o(owner, kind, acl)
};

# Every privilege on every member of the extension (and on its schema, and
# on their columns) that a role other than the object's owner holds, one a
# line: "<object> <privilege> to <grantee> by <grantor>[ with grant option]",
# sorted.  A NULL ACL counts as its default (EXECUTE for PUBLIC on a
# function).  Roles by name, so two clusters compare.
sub member_privileges
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, qq{
	WITH members AS ($members_sql),
	acls AS (
		SELECT m.classid, m.objid, 0 AS objsubid, m.owner,
		       coalesce(m.acl, pg_catalog.acldefault(m.kind::"char", m.owner)) AS acl
		  FROM members m
		UNION ALL
		SELECT m.classid, m.objid, a.attnum, m.owner, a.attacl
		  FROM members m JOIN pg_catalog.pg_attribute a ON a.attrelid = m.objid
		 WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND a.attacl IS NOT NULL)
	SELECT pg_catalog.string_agg(line, E'\\n' ORDER BY line)
	  FROM (SELECT pg_catalog.format('%s %s to %s by %s%s',
	                   pg_catalog.pg_describe_object(s.classid, s.objid, s.objsubid),
	                   e.privilege_type,
	                   CASE e.grantee WHEN 0 THEN 'PUBLIC' ELSE e.grantee::pg_catalog.regrole::text END,
	                   e.grantor::pg_catalog.regrole,
	                   CASE WHEN e.is_grantable THEN ' with grant option' ELSE '' END) AS line
	          FROM acls s CROSS JOIN LATERAL pg_catalog.aclexplode(s.acl) e
	         WHERE e.grantee <> s.owner) l});
}

# The initial privileges (pg_init_privs) of the members of the extension,
# its schema and their columns: "<object> <initprivs>" a line, sorted.
sub member_init_privs
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, qq{
	WITH members AS ($members_sql)
	SELECT pg_catalog.string_agg(line, E'\\n' ORDER BY line)
	  FROM (SELECT pg_catalog.format('%s %s%s',
	                   pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid), i.initprivs,
	                   CASE i.privtype WHEN 'e' THEN '' ELSE ' (' || i.privtype::text || ')' END) AS line
	          FROM pg_catalog.pg_init_privs i
	          JOIN members m ON m.classid = i.classoid AND m.objid = i.objoid) l});
}

1;
