// registry.cpp - the table of every module's self-test.
//
// Adding a module means adding its header here and one line to the table.
#include "registry.hpp"

#include "sample/arena.h"
#include "sample/base64.h"
#include "sample/bitset.h"
#include "sample/csv.h"
#include "sample/expr.h"
#include "sample/hashmap.h"
#include "sample/heap.h"
#include "sample/list.h"
#include "sample/matrix.h"
#include "sample/primes.h"
#include "sample/rng.h"
#include "sample/selftest.h"
#include "sample/sort.h"
#include "sample/stats.h"
#include "sample/strbuf.h"
#include "sample/textdist.h"
#include "sample/textwrap.h"
#include "sample/tokenizer.h"
#include "sample/utf8.h"
#include "sample/vec.h"
#include "sample/wordfreq.h"

#include "sample/cxx/c_wrappers.hpp"
#include "sample/cxx/expression.hpp"
#include "sample/cxx/glob.hpp"
#include "sample/cxx/graph.hpp"
#include "sample/cxx/ini.hpp"
#include "sample/cxx/interval_map.hpp"
#include "sample/cxx/json.hpp"
#include "sample/cxx/lru_cache.hpp"
#include "sample/cxx/matrix.hpp"
#include "sample/cxx/polygon.hpp"
#include "sample/cxx/polynomial.hpp"
#include "sample/cxx/rational.hpp"
#include "sample/cxx/ring_buffer.hpp"
#include "sample/cxx/scene.hpp"
#include "sample/cxx/shape.hpp"
#include "sample/cxx/strings.hpp"
#include "sample/cxx/summary.hpp"
#include "sample/cxx/trie.hpp"

namespace sample::app {

const std::vector<Module>& modules()
{
    // C and C++ functions share this table: the compilers give C linkage no distinct type.
    static const std::vector<Module> table = {
        {"core/version", sample_version_selftest},
        {"core/digest", sample_digest_selftest},
        {"core/arena", sample_arena_selftest},
        {"core/vec", sample_vec_selftest},
        {"core/list", sample_list_selftest},
        {"core/heap", sample_heap_selftest},
        {"core/hashmap", sample_hashmap_selftest},
        {"core/bitset", sample_bitset_selftest},
        {"core/rng", sample_rng_selftest},
        {"core/sort", sample_sort_selftest},
        {"text/strbuf", sample_strbuf_selftest},
        {"text/utf8", sample_utf8_selftest},
        {"text/tokenizer", sample_tokenizer_selftest},
        {"text/base64", sample_base64_selftest},
        {"text/csv", sample_csv_selftest},
        {"text/wordfreq", sample_wordfreq_selftest},
        {"text/textdist", sample_textdist_selftest},
        {"text/textwrap", sample_textwrap_selftest},
        {"num/matrix", sample_matrix_selftest},
        {"num/stats", sample_stats_selftest},
        {"num/expr", sample_expr_selftest},
        {"num/primes", sample_primes_selftest},
        {"cxx/ring_buffer", ring_buffer_selftest},
        {"cxx/lru_cache", lru_cache_selftest},
        {"cxx/interval_map", interval_map_selftest},
        {"cxx/graph", graph_selftest},
        {"cxx/trie", trie_selftest},
        {"cxx/strings", strings_selftest},
        {"cxx/json", json_selftest},
        {"cxx/ini", ini_selftest},
        {"cxx/glob", glob_selftest},
        {"cxx/shape", shape_selftest},
        {"cxx/polygon", polygon_selftest},
        {"cxx/scene", scene_selftest},
        {"cxx/rational", rational_selftest},
        {"cxx/polynomial", polynomial_selftest},
        {"cxx/matrix", matrix_cxx_selftest},
        {"cxx/summary", summary_selftest},
        {"cxx/c_wrappers", c_wrappers_selftest},
        {"cxx/expression", expression_selftest},
    };
    return table;
}

}  // namespace sample::app
