// The oracle for tests/quartz_oracle.rs: Quartz 2.3's own CronExpression, fed by standard
// input. Each line is "zone<TAB>start-ms<TAB>count<TAB>expression"; each answer line is
// "ERR <message>" when Quartz refuses the expression, else up to `count` instants in epoch
// milliseconds, each the first valid time after the one before ("-" when none is left,
// "THROW" when the search failed, "HANG" when it had not ended after two seconds: Quartz 2.3
// loops forever on some expressions, and such a search is stopped).
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.util.Date;
import java.util.TimeZone;
import org.quartz.CronExpression;

public class QuartzNext {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", 4);
            CronExpression cron;
            try {
                cron = new CronExpression(parts[3]);
            } catch (Exception e) {
                out.write("ERR " + String.valueOf(e.getMessage()).replace('\n', ' '));
                out.newLine();
                continue;
            }
            cron.setTimeZone(TimeZone.getTimeZone(parts[0]));
            final CronExpression expression = cron;
            final long start = Long.parseLong(parts[1]);
            final int count = Integer.parseInt(parts[2]);
            final StringBuilder answer = new StringBuilder();
            Thread search = new Thread(() -> {
                Date at = new Date(start);
                for (int i = 0; i < count; i++) {
                    String item;
                    try {
                        at = expression.getNextValidTimeAfter(at);
                        item = at == null ? "-" : Long.toString(at.getTime());
                    } catch (Exception e) {
                        item = "THROW";
                    }
                    synchronized (answer) {
                        answer.append(i == 0 ? "" : " ").append(item);
                    }
                    if (at == null || item.equals("THROW")) {
                        break;
                    }
                }
            });
            search.setDaemon(true);
            search.start();
            search.join(2000);
            if (search.isAlive()) {
                search.stop();
                synchronized (answer) {
                    answer.append(answer.length() == 0 ? "" : " ").append("HANG");
                }
            }
            out.write(answer.toString());
            out.newLine();
        }
        out.flush();
    }
}
