#include "base/error.h"
#include "cli/commands.h"

namespace tf::cli {

int cmd_serve(int, char**) { fail("serve: not built yet"); }

}  // namespace tf::cli
