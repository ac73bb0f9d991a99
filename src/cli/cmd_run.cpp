#include "base/error.h"
#include "cli/commands.h"

namespace tf::cli {

int cmd_run(int, char**) { fail("run: not built yet"); }

}  // namespace tf::cli
