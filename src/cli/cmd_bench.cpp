#include "base/error.h"
#include "cli/commands.h"

namespace tf::cli {

int cmd_bench(int, char**) { fail("bench: not built yet"); }

}  // namespace tf::cli
