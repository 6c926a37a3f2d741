import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.common.utils.Exit;

/**
 * Runs several of Kafka's command-line tools one after another in this one JVM, so that a test
 * comparing many tool commands pays for one JVM start, not one per command.
 *
 * <p>Standard input: one command per line, its words separated by tabs, the first word the
 * tool's main class. Standard output, per command: a line {@code ==== <n> exit=<code>}, then
 * what the command printed to stdout, a line {@code ---- stderr}, then what it printed to
 * stderr. A tool ends with {@code Exit.exit(code)}: the exit procedure is replaced by one that
 * throws, which carries the code back here instead of ending the JVM.
 */
public final class RunTools {
    private static final class Exited extends RuntimeException {
        final int code;

        Exited(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    public static void main(String[] args) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        Exit.setExitProcedure((code, message) -> {
            throw new Exited(code);
        });
        Exit.setHaltProcedure((code, message) -> {
            throw new Exited(code);
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        List<String[]> commands = new ArrayList<>();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isEmpty()) {
                commands.add(line.split("\t", -1));
            }
        }
        int n = 0;
        for (String[] words : commands) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            int code = 0;
            try {
                Method main = Class.forName(words[0]).getMethod("main", String[].class);
                main.invoke(null, (Object) Arrays.copyOfRange(words, 1, words.length));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof Exited) {
                    code = ((Exited) cause).code;
                } else {
                    cause.printStackTrace();
                    code = 1;
                }
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            realOut.println("==== " + n + " exit=" + code);
            realOut.print(out.toString(StandardCharsets.UTF_8));
            realOut.println("---- stderr");
            realOut.print(err.toString(StandardCharsets.UTF_8));
            realOut.flush();
            n++;
        }
        realOut.println("==== end");
        realOut.flush();
        System.exit(0);  // a tool may leave non-daemon threads behind
    }
}
