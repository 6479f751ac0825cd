# ordered_events: PGXS build.  `make`, `make install`, `make installcheck`
# against a running server; `make test` and `make demo` do everything on a
# fresh Debian machine (README.md, "Quick start"; docs/contributing.md).

EXTENSION = ordered_events
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" ordered_events.control)

MODULE_big = ordered_events
OBJS = \
	src/args.o \
	src/arrival.o \
	src/backlog.o \
	src/backlog_keys.o \
	src/catalog.o \
	src/compaction.o \
	src/consumer_read.o \
	src/dead_letter.o \
	src/delivery.o \
	src/gap_policy.o \
	src/gaps.o \
	src/handler.o \
	src/ingest.o \
	src/internal_query.o \
	src/keyset.o \
	src/keys.o \
	src/lane.o \
	src/lease.o \
	src/lease_worker.o \
	src/ordered_events.o \
	src/privileges.o \
	src/release.o \
	src/seq_bits.o \
	src/shard.o \
	src/shmem.o \
	src/skip_gap.o \
	src/step.o \
	src/table_insert.o \
	src/wait.o \
	src/worker.o
PG_CPPFLAGS = -DOE_LIBRARY_VERSION='"$(EXTVERSION)"'

# The install script of the current version is built from the schema's
# source files, by concern, in this order; the update scripts are frozen
# once released (docs/contributing.md, "Changing the schema").
SCHEMA = streams privileges ingest release consumers groups leases handlers retention worker monitoring shard
CURRENT_SCRIPT = ordered_events--$(EXTVERSION).sql
DATA_built = $(CURRENT_SCRIPT)
DATA = $(filter-out $(CURRENT_SCRIPT),$(sort $(wildcard ordered_events--*.sql)))
PGFILEDESC = "ordered_events - ordered, exactly-once release of sequenced events"

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=ordered_events

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=ordered_events

# TAP tests make their own clusters: run by `make installcheck-tap` as a
# non-root user (test/run does that), not by `make installcheck`.
PROVE_TESTS = test/t/*.pl

# CI builds with WERROR=1 (.ci/run): any compiler warning fails the build.
# Never on by default: a newer compiler's new warning must not break a
# user's build.
WERROR ?=
ifeq ($(WERROR),1)
PG_CFLAGS += -Werror
endif

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(CURRENT_SCRIPT): $(SCHEMA:%=src/sql/%.sql)
	{ printf '%s\n' '/* $@: built by make from src/sql/ (see Makefile); edit those files */' \
	    '' '\echo Use "CREATE EXTENSION ordered_events" to load this file. \quit' '' \
	    '-- Functions may name objects of a later file (CREATE EXTENSION resets this).' \
	    'SET check_function_bodies = false;'; \
	  for f in $^; do printf '\n/* ---- %s ---- */\n\n' "$$f"; cat "$$f"; done; } > $@

# The router of streams sharded over several servers, an extension of its
# own in router/ (plain SQL over PL/Proxy): built, installed, tested and
# cleaned with this one.
.PHONY: router-all router-install router-uninstall router-installcheck router-clean
all: router-all
install: router-install
uninstall: router-uninstall
installcheck: router-installcheck
clean: router-clean
router-all router-install router-uninstall router-installcheck router-clean:
	$(MAKE) -C router PG_CONFIG=$(PG_CONFIG) $(patsubst router-%,%,$@)

# Every module includes the one internal header.
$(OBJS): src/ordered_events.h

.PHONY: test demo bench installcheck-tap

installcheck-tap:
	$(prove_installcheck)

# Everything, on a throwaway cluster: pg_regress, isolation, pgTAP, TAP.
test:
	test/run

demo:
	test/demo

bench:
	bench/run
